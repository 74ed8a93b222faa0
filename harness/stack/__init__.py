"""The stack (Jepsen's db): Redis, Toxiproxy, the app and its consumers, local or under compose."""
