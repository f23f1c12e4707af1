"""Lightning callbacks: per-sample predictions, and later cross-validation and reports."""
