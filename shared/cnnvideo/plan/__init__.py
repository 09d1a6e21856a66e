"""Where to cut: profiles, change-rate predictors, the cost model's inputs and timing, schedulers and adaptation."""
