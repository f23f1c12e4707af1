"""Training glue: run directories, resolvers, callbacks and the train/test driver."""
