"""The nemesis: faults, fault plans and their schedule, through Toxiproxy and the stack."""
