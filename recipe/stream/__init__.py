"""Model output → protocol events and complete responses for the three APIs."""
