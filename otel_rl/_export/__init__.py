"""What leaves the process: the exporters (:mod:`.exporters`: OTLP, file, console), the worker threads that drive them
off the training thread (:mod:`.worker`), the bounded queues of records and spans (:mod:`.outbox`), the export
health warnings (:mod:`.health`) and the console's readable lines (:mod:`.console`)."""
