"""Task graphs per loading policy, event-driven dispatch, and seeded pipelines."""
