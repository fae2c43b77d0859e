"""keras_dml benchmarks: each system timed in its own process (see `processes`).

`python -m benchmarks` runs every case and writes a JSON file and a Markdown
table; `benchmarks/README.md` explains the method and holds the figures.
"""
