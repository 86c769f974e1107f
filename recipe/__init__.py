"""Recipe: the DeepSeek request/prompt/token codec, structured output, embedded engine and server."""

__version__ = "0.1.0"
