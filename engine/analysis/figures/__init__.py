"""The campaign's figures, one module each with a ``draw(tables, style, context)``;
engine.analysis.plots registers them by name, and common.py holds what they share. This
file imports none of them."""
