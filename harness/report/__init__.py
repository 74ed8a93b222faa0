"""The verdict on disk and on screen: result.json, junit.xml, report.html, the matrix."""
