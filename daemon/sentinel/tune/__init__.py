"""``sentinel tune``: the fastest launch configuration that still answers correctly."""
