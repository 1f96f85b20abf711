"""Running pipelines and writing run folders."""
