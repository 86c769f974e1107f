"""Prompt formats, one module per model family (DeepSeek V4, DeepSeek V4.1, ChatML)."""
