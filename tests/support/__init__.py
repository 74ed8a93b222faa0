"""Support code shared by the test packages (import as `tests.support.<module>`).

Each module here serves more than one test package; what only one package uses stays
in that package's helpers or conftest.
"""
