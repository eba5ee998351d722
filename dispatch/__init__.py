"""dispatch: container jobs on a fleet of Docker hosts sharing one Redis."""
