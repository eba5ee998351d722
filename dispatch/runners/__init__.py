"""How a job's command is run: the runner protocol and the exit-to-outcome table (`base`),
a plain subprocess (`process`), and a container through the Docker Engine API (`docker`)."""
