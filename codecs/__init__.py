"""Prompt formats, one module per model family (DeepSeek V4, DeepSeek V4.1, DeepSeek-R1 and its distills, ChatML)."""
