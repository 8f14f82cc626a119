"""Benchmark programs: ``python -m bench.NAME --help``. Each writes JSON to bench/results/ and prints a table."""
