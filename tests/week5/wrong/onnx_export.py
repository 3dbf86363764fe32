"""Known-wrong ONNX exports the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("positions_not_added",
          "the export wrapper forgets the learned position embeddings (GPT-2 layout)",
          old="            x = x + gpt.pos.weight[:T]\n",
          new="            pass\n",
          expect="elements differ", tests=("-k", "wrapper_is_the_same_function")),
    Wrong("dynamic_shapes_dropped",
          "the dynamic export is traced at the example's shape: the ONNX graph then runs only at that shape",
          old='        dynamic_shapes = {"idx": dims}\n',
          new="        dynamic_shapes = None\n",
          expect="any_shape|shape", tests=("-k", "any_shape")),
]
