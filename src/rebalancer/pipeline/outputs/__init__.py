"""Where a run writes: output modes, staging and swap, the manifest, the summary and the report."""
