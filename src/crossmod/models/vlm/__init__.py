"""What differs per VLM family (as data), the LoRA VLM classifier and tag generator, their preprocessing and the
vision-feature cache."""
