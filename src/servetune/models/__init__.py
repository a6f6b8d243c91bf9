"""Model directories for --load-format dummy (real architectures, random weights, synthetic tokenizer)."""
