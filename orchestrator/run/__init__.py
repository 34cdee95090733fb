"""Running: submission, launch, status, resubmission, environments, doctor and validate; imports plan and the root, never results."""
