"""What the operator configures: env settings (`settings`), the shapes of the watched JSON
files (`schemas`), and the loader that reads them again when they change (`watcher`)."""
