"""What comes out: the run report, class labels, the exactness check, the live view and progress."""
