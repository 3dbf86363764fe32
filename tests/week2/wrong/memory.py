"""Known-wrong memory probes the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("first_element_pointers_compared",
          "views detected with t.data_ptr(): a slice's first element moves with its offset, so x[1:3] looks like a copy",
          old="    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()\n",
          new="    return a.data_ptr() == b.data_ptr()\n",
          expect="views_share_storage", tests=("-k", "views_share_storage")),
    Wrong("parameters_counted_as_activations",
          "saved_activation_bytes counts the weights the graph saves too: checkpointing then seems to save little",
          old="        if ptr not in params and ptr not in seen:\n",
          new="        if ptr not in seen:\n",
          expect="weights|activation_bytes", tests=("-k", "counts_inputs_not_weights")),
]
