"""Read paths and the derived artifacts behind them (ANN index, full-text index).

Every artifact implements :class:`efface.paths.base.DerivedArtifact`: it absorbs the
origin's change log up to an epoch and reports the newest epoch it has absorbed.
"""
