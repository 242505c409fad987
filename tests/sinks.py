"""The connector sink contract in tests: a callable that takes a batch of documents and keeps it."""


class Collector:
    def __init__(self):
        self.batches = []

    def __call__(self, docs):
        self.batches.append(list(docs))

    @property
    def docs(self):
        return [d for batch in self.batches for d in batch]
