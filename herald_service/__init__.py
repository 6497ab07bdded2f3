"""Herald: safety moderation for LLM chat from the backbone's own hidden states.

A resident causal LM runs one prefill per prompt; the last-token residual stream of every decoder layer is
projected onto a per-layer LDA harm direction, and the cross-layer trajectory of those projections is scored by a
288-parameter MLP (see DESIGN.md section 1).
"""

__version__ = "0.1.0"
