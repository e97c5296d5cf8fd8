"""popmq package."""
