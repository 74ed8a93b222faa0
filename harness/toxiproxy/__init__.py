"""An embedded server that speaks Toxiproxy's HTTP API."""
