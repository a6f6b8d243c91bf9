"""`servetune ab`: two engines (versions, images, launch commands), one workload, booted
alternately; a verdict per scenario and metric from the two-level (boot, replicate) model."""
