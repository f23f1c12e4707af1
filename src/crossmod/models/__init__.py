"""Model side of crossmod: backbones, fusion, heads, preprocessors and the LightningModule."""
