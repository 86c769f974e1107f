"""The embedded engine (torch): takes token ids and sampling parameters, never JSON."""
