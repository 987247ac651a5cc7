"""Golden histories: the demo's two conversations as exported bundles (``record``)."""
