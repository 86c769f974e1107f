"""JSON Schemas of the wire formats (requests, responses, stream events, errors), loaded as package data."""
