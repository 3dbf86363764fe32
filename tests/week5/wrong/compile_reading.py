"""Known-wrong readings of Inductor's output the tests must reject (`python -m course exercises --must-fail`)."""
from classroom.must_fail import Wrong

WRONG = [
    Wrong("residual_add_from_the_name",
          "every norm kernel with 'add' in its name is called a fused residual add: '+ eps' is an add too, "
          "only the number of tensors it reads tells",
          old='    more_reads = reads is not None and reads > NORM_READS["forward"]\n',
          new="    more_reads = True\n",
          expect="course_kernel|cross_op|kernel_name", tests=("-k", "kernel_name_says")),
    Wrong("one_launch_per_kernel",
          "each generated kernel is counted once, not once per call site in the launch sequence "
          "(a kernel reused by every layer is launched many times)",
          old='            sites = len(re.findall(rf"\\b{re.escape(name)}(?:\\.run)?\\(", body))\n',
          new="            sites = 1\n",
          expect="graphs_kernels_and_library_calls", tests=("-k", "output_code_is_split")),
]
