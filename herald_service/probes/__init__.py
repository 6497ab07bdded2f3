"""The HERALD method: per-layer LDA directions, trajectory features, the 288-parameter scorer, and the artifact.

Pure numpy/torch math; nothing here imports transformers or does I/O except :mod:`.artifact`.
"""
