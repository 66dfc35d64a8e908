"""The notebook layer: IPython magics (`magics`, `batch_magics`, `library_magics`), their argument
parsing (`args`), `{var}` interpolation (`interpolate`) and the result types they display (`display`)."""
