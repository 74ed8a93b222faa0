"""What the harness starts, how it is found again (the registry) and how it dies (the lifeline)."""
