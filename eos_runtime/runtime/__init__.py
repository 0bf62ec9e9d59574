"""The task runtime: the I/O around the pure protocol core (buffer, change log, outputs,
the task loops) and the driver that plans a job and runs its tasks on the engine."""
