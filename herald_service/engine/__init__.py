"""The inference engine: one worker thread owns the model; requests reach it through a bounded queue."""
