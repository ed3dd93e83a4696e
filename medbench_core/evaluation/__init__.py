"""Evaluation: metrics, statistics, the leaderboard and reports, plots, exports and run records."""
