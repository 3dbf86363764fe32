source .devwheels/setup.sh && export PYTHONPATH=$PWD/.devwheels:$PWD:$PYTHONPATH COURSE_BACKEND=gpu COLUMNS=200 COURSE_FAILURE_LOG=$OUT/failures.log TIMELOG=$OUT/timelog.txt
nvidia-smi --query-gpu=name --format=csv,noheader; git log -1 --format=%h 2>/dev/null
s=$(date +%s); timeout 320 python3 -m pytest -n 14 -p pytest_timelog -q -rs -p no:cacheprovider tests > $OUT/pytest.log 2>&1; echo "rc=$? wall=$(( $(date +%s)-s ))" | tee -a $OUT/pytest.log; grep -E "^(FAILED|ERROR)" $OUT/pytest.log | head -20; tail -1 $OUT/pytest.log
timeout 170 python3 -m week5_integration.aot_package_bench --out week5_integration/results --budget-s 140 > $OUT/aot_bench.log 2>&1; echo "aot rc=$?"; tail -25 $OUT/aot_bench.log; cp week5_integration/results/aot_package.* $OUT/ 2>/dev/null
timeout 80 python3 -m course stages flash_attention_backward flash_attention_forward > $OUT/stages.log 2>&1; echo "stages rc=$?"; tail -12 $OUT/stages.log
