"""Feature extractors for one modality each; fusion modules combine them."""
