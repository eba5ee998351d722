"""The daemon: assembly from settings (`assembly`), what it does before it claims (`boot`),
the claim-and-finish loop (`worker`) and one job's way through the gates to its run
(`processor`)."""
