"""Runtime: values, the interpreter, TVM lowering and the compiled executor."""
