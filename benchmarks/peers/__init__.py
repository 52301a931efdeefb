"""One module per peer job queue. Each runs in that peer's own venv as
`python -m peers.<module> bench|worker --url ...` (see driver.py)."""
