"""The names of ``herald eval``'s methods that more than one module needs, in a module that imports nothing, so that
the CLI's ``--help`` and ``herald report`` read them without scikit-learn (:mod:`.methods` builds the methods)."""

LATENT_BASELINES = ("lda_best_layer", "logreg_last", "logreg_mid", "features_logreg", "mlpm")
"""The baselines that read the backbone's states: "the best latent baseline" of issue 3's targets is one of them."""

TEXT_BASELINES = ("text_logreg",)
"""Controls that read the prompt's text, not the backbone's states: never "the best latent baseline" of issue 3's
targets, and not part of the report's saturation reading."""

DEFAULT_METHODS = ("herald", *LATENT_BASELINES, *TEXT_BASELINES)
"""``herald eval --methods`` without the option."""
