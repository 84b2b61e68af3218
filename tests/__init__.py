"""The test suite (a regular package: crafter's dependency opensimplex installs a top-level `tests`)."""
