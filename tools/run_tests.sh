#!/usr/bin/env bash
# Run the test suite in each matrix leg's virtualenv, once per database.
#
#   tools/run_tests.sh [--dbs "sqlite postgres"] [--leg-dbs "LEG=DB,DB ..."]
#                      [--whole-suite]
#                      [--faults LEG] [--fault-dbs "sqlite mariadb postgres"]
#                      [--browser "LEG ..."] [LEG ...]
#
# Each leg runs the suite on every database of --dbs, or on those that
# --leg-dbs names for it (e.g. py312-dj6=mariadb). A database leg tests what
# differs on that database: SQLite runs the whole suite; PostgreSQL and
# MariaDB run the tests whose outcome the database decides (VENDOR_TESTS:
# the SQL the package writes by hand, transactions, locks, bulk inserts,
# aggregates, keys and collations), and, in a leg that has no SQLite run,
# also the tests whose outcome the Django version decides (DJANGO_TESTS),
# since that leg has no whole-suite run. --whole-suite runs the whole suite
# on every database. tests/package/test_test_legs.py checks that every test
# file is run by some run and that every database test file is sorted into
# VENDOR_TESTS or VENDOR_INDEPENDENT_TESTS.
#
# Each leg also runs Django's own Tasks test suite against the backend
# (tools/django_tasks_suite.py), once, on its last database; on a leg whose
# Django has no django.tasks it is reported as not applicable.
#
# The legs run everything but the fault-injection scenarios (tests/faults),
# the upgrade test (tests/upgrade: the previous release's processes and the
# current one's side by side) and the process-supervision tests
# (PROCESS_TESTS), which are slow and do not depend on the Python or Django
# version: with --faults LEG they run once, after the legs, in LEG, on the
# databases of --fault-dbs (default: --dbs): the upgrade test against each;
# the core fault scenarios (CORE_FAULTS: kills, Redis restarted empty or
# flushed, fenced pauses) against each server database but the last; and
# every fault scenario, the process tests and the Redis Sentinel and Redis
# Cluster scenarios against the last one only (PostgreSQL, the production
# database: those scenarios exercise processes, signals and servers).
# The browser tests (tests/browser: the example shop and the admin in
# headless Chromium, on the example's own SQLite file) run last, once in each
# leg that --browser names (one or several, space-separated: the admin's
# markup differs between Django versions), and leave their screenshots in
# .venv/logs/screenshots/LEG (or DELAYQ_SCREENSHOTS/LEG). They need Debian's
# chromium (tools/bootstrap.sh --browser); without it they fail.
#
# PYTEST_ARGS (environment) is added to every pytest command line, with shell
# quoting, e.g. PYTEST_ARGS='-x -k "dispatch and not slow"'.
#
# Every run goes ahead even when an earlier one failed, so that one report
# covers the whole matrix; the exit status is non-zero if any run failed,
# including pytest's status 5 (no tests collected), except in the fault run,
# where a PYTEST_ARGS filter may rightly select nothing. The test suite starts
# its own redis-server and PostgreSQL or MariaDB (tools/servers/), selected by
# DELAYQ_TEST_DB. The report is also written to .venv/logs/summary.txt.
set -uo pipefail

cd "$(dirname "$(realpath "$0")")/.." || exit 2

dbs="sqlite postgres"
leg_dbs=""
fault_dbs=""
# The fault scenarios a database's transactions and locks decide: workers
# and groups killed or paused past their visibility timeout, the database's
# sessions ended or the server restarted, Redis down, restarted empty or
# flushed, dispatchers killed, a crash between commit and the Redis write,
# cancel racing dispatch, periodic ticks through kills.
# (The dispatcher's and Sentinel's and Cluster's scenarios, a worker's
# SIGTERM and Redis frozen or rolled back to a snapshot exercise processes
# and Redis, not the database: they run on PostgreSQL only.)
CORE_FAULTS=(
    tests/faults/stores/test_database_faults.py
    tests/faults/processes/test_worker_faults.py::test_worker_killed_mid_task
    tests/faults/processes/test_worker_faults.py::test_worker_paused_past_its_visibility_timeout
    tests/faults/processes/test_worker_faults.py::test_a_poison_task_fails_after_its_attempts_and_harms_no_other
    tests/faults/processes/test_group_faults.py
    tests/faults/stores/test_redis_faults.py::test_redis_down_during_schedule_then_back_empty
    tests/faults/stores/test_redis_faults.py::test_redis_loses_everything_mid_drain
    tests/faults/processes/test_crash_after_commit.py
    tests/faults/processes/test_cancel_race.py
    tests/faults/processes/test_periodic_faults.py
)
# Worker processes under a supervisor, killed, stuck and recycled; the
# processes of `make example`, stopped with Ctrl-C; delayq_status against
# killed processes; the metrics endpoints of the commands' processes;
# periodic schedules across stops and deploys; workers that are PID 1 of
# their own PID namespace, stopped one by one; the commands under a
# least-privilege Redis user (Redis's ACL: neither the database nor the
# Django version changes what the commands send).
PROCESS_TESTS=(
    tests/acceptance/commands/test_worker_processes.py
    tests/acceptance/commands/test_time_limit_processes.py
    tests/acceptance/commands/test_example_runner.py
    tests/acceptance/commands/test_status_processes.py
    tests/acceptance/commands/test_metrics_processes.py
    tests/acceptance/commands/test_metrics_without_prometheus.py
    tests/acceptance/commands/test_periodic_processes.py
    tests/acceptance/commands/test_rolling_restart_processes.py
    tests/acceptance/projects/test_redis_acl.py
    tests/supervisor/test_cancel_running_processes.py
    tests/supervisor/test_key_prefix_processes.py
)
# Fresh projects of their own, on their own SQLite file. Each runs once, on
# the last database of one leg (a leg runs them on its server database, or
# on SQLite when it has no other). New projects, as a newcomer makes them
# today, on the newest Django (the last leg): docs/quickstart.md followed
# (tests/docs), and the example shop (on a database of its own on the leg's
# last database server, or its own SQLite file).
NEW_PROJECT_TESTS=(
    tests/docs/test_quickstart.py
    tests/acceptance/projects/test_example_shop.py
)
# A shop's own test suite, on the long-term-support Django most shops run
# (the first leg): a project's `manage.py test` beside its development
# processes; the testing toolkit in a user's project, pytest and the
# example's own tests, and its async view under uvicorn.
SHOP_PROJECT_TESTS=(
    tests/acceptance/projects/test_user_project_tests.py
    tests/acceptance/projects/test_testing_toolkit_projects.py
)
# The tests whose outcome the database decides, run on PostgreSQL and
# MariaDB besides SQLite: the package's own SQL (claims, fenced updates,
# COPY and bulk inserts, EXPLAIN plans), transactions, savepoints, deadlocks
# and on_commit, unique keys and collations, aggregates of the admin,
# status and metrics, the planner's compare-and-set, database routers and
# migrations, and real processes competing for rows.
VENDOR_TESTS=(
    tests/db
    tests/worker
    tests/api/test_api_properties.py
    tests/api/test_async_api.py
    tests/api/test_async_tasks.py
    tests/api/test_bulk.py
    tests/api/test_cancel_reschedule.py
    tests/api/test_dedupe.py
    tests/api/test_key_lookups.py
    tests/api/test_past_eta.py
    tests/api/test_retry.py
    tests/api/test_schedule.py
    tests/api/test_bad_input.py::test_the_callers_transaction_stays_usable_after_bad_input
    tests/rows/test_outbox.py
    tests/rows/test_payload_fidelity.py
    tests/rows/test_priority.py
    tests/recurring/test_due_rows.py
    tests/recurring/test_planner.py
    tests/recurring/test_runtime_schedules.py
    tests/recurring/test_schedule_transitions.py
    tests/recurring/test_tick_keys.py::test_the_query_forms_write_and_read_keys_as_the_functions_do
    tests/recurring/test_tick_keys.py::test_the_overview_counts_late_ticks_alike_bounded_or_not
    tests/admin/test_admin.py
    tests/admin/test_dashboard.py
    tests/admin/test_periodic.py
    tests/reporting/test_status.py
    tests/reporting/test_health.py
    tests/reporting/test_metrics_collector.py
    tests/sweeper/test_sweeper.py
    tests/sweeper/test_redis_loss.py
    tests/queues
    tests/limits/test_admission.py
    tests/testing/test_testing_toolkit.py
    tests/store/test_key_prefix_owner.py
    tests/contrib/test_tasks_backend.py
    tests/contrib/test_celery_beat_import.py
    tests/acceptance/commands/test_commands.py
    tests/acceptance/commands/test_middleware_processes.py
    tests/management/test_tasks_command.py
)
# Tests that use the database but whose outcome it does not decide: they
# validate input before any SQL, or exercise Redis, settings, logging or a
# project's set-up (test_bad_input.py and test_tick_keys.py but for the
# tests VENDOR_TESTS names). SQLite runs them; a new database test file
# must be added here or to VENDOR_TESTS.
VENDOR_INDEPENDENT_TESTS=(
    tests/api/test_bad_input.py
    tests/api/test_call_signature.py
    tests/recurring/test_tick_keys.py
    tests/recurring/test_setting_tasks.py
    tests/admin/test_runtime_schedules.py
    tests/conf/test_checks.py
    tests/conf/test_deploy_checks.py
    tests/contrib/test_celery_tasks.py
    tests/contrib/test_django_tasks_suite.py
    tests/contrib/test_log_context.py
    tests/contrib/test_log_redaction.py
    tests/contrib/sentry
    tests/tracing
    tests/dispatcher/test_dispatcher.py
    tests/docs/test_claims_on_servers.py
    tests/docs/test_examples.py
    tests/limits/test_bad_limits.py
    tests/limits/test_limits_in_tests.py
    tests/limits/test_limits_reported.py
    tests/reporting/test_activity.py
    tests/reporting/test_metrics_directory.py
    tests/reporting/test_status_names.py
    tests/store/test_connection.py
    tests/store/test_test_namespace.py
    tests/sweeper/test_broken_keys.py
    tests/testing/test_indexer_backends.py
    tests/testing/test_loops_in_test_mode.py
    tests/acceptance/commands/test_celery_processes.py
    tests/acceptance/commands/test_tasks_backend_processes.py
    tests/acceptance/projects/test_api_only_project.py
    tests/acceptance/projects/test_shell_test_environment.py
)
# The tests whose outcome the Django version decides: the admin's forms and
# markup, system checks, django.tasks against the backport, Django's test
# environment, projects made from the docs. A leg without a SQLite run adds
# them to its server database's run.
DJANGO_TESTS=(
    tests/admin/test_display.py
    tests/admin/test_runtime_schedules.py
    tests/conf/test_checks.py
    tests/contrib/test_tasks_compat.py
    tests/contrib/test_django_tasks_suite.py
    tests/docs/test_examples.py
    tests/testing/test_indexer_backends.py
    tests/testing/test_loops_in_test_mode.py
    tests/store/test_test_namespace.py
    tests/acceptance/projects/test_api_only_project.py
    tests/acceptance/projects/test_shell_test_environment.py
    tests/acceptance/commands/test_tasks_backend_processes.py
    tests/acceptance/commands/test_celery_processes.py
)
faults_leg=""
browser_legs=()
legs=()
whole_suite=false
while [[ $# -gt 0 ]]; do
    case "$1" in
        --dbs) dbs=$2; shift 2 ;;
        --leg-dbs) leg_dbs=$2; shift 2 ;;
        --whole-suite) whole_suite=true; shift ;;
        --fault-dbs) fault_dbs=$2; shift 2 ;;
        --faults) faults_leg=$2; shift 2 ;;
        --browser) read -ra more <<<"$2"; browser_legs+=("${more[@]}"); shift 2 ;;
        -*) echo "run_tests: unknown option $1" >&2; exit 2 ;;
        *) legs+=("$1"); shift ;;
    esac
done
[[ ${#legs[@]} -gt 0 || -n $faults_leg || ${#browser_legs[@]} -gt 0 ]] ||
    { echo "run_tests: no matrix leg given" >&2; exit 2; }

# Quoting in PYTEST_ARGS is honoured, as on a command line.
pytest_args=()
eval "pytest_args=(${PYTEST_ARGS:-})"
# pytest's output goes through tee, so keep colours when a person watches.
if [[ -t 1 ]]; then export PY_COLORS=1; fi

# Bytecode: a Python process that compiles Django and the package from
# source spends about 3 s of CPU before it starts (0.8 s from cached
# bytecode), and the suite starts hundreds of them (commands, projects,
# probes). Where PYTHONDONTWRITEBYTECODE is set, as in many CI images,
# nothing is ever cached: every process pays again. The cache goes under
# .venv, outside the work tree and the virtualenvs' site-packages.
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-$PWD/.venv/pycache}

logs=.venv/logs
mkdir -p "$logs"
summary=$logs/summary.txt
: >"$summary"
failed=0

# run_pytest LEG DB LABEL [PYTEST ARGS...]: one pytest run, logged and
# summarised under LABEL.
run_pytest() {
    local leg=$1 db=$2 label=$3
    shift 3
    local python=.venv/$leg/bin/python
    if [[ ! -x $python ]]; then
        echo "run_tests: $python missing: run tools/bootstrap.sh $leg" >&2
        exit 2
    fi
    local log=$logs/pytest-$label-$db.log
    printf '\n==> %s, %s: pytest %s\n' "$label" "$db" "$*"
    local start=$SECONDS
    # The cache stays in .venv so that --lf/--ff work without littering
    # the work tree.
    DELAYQ_TEST_DB=$db "$python" -m pytest -o cache_dir=.venv/pytest-cache \
        "$@" 2>&1 | tee "$log"
    local status=${PIPESTATUS[0]}
    # pytest's closing line, e.g. "=== 41 passed, 2 skipped in 3.10s ==="
    # (without the "=" under -q).
    local outcome
    outcome=$(sed 's/\x1b\[[0-9;]*m//g' "$log" |
        grep -E '(passed|failed|errors?|skipped|deselected|no tests ran).* in [0-9.]+s' |
        tail -n 1 | sed -E 's/^=+ | =+$//g')
    local verdict
    case $status in
        0) verdict=ok ;;
        5) verdict="FAILED (no tests collected)" ;;
        *) verdict="FAILED (exit $status)" ;;
    esac
    # A -k filter in PYTEST_ARGS may select no fault scenario, browser test
    # or test of a database's subset at all; without a filter, no tests collected is a failure like anywhere
    # else.
    if [[ $status -eq 5 && ($label == faults-* || $label == upgrade-* ||
        $label == browser-* || -n ${SUBSET_RUN:-}) &&
        ${#pytest_args[@]} -gt 0 ]]; then
        verdict="nothing selected"
        status=0
    fi
    [[ $status -eq 0 ]] || failed=$((failed + 1))
    printf '%-18s %-9s %-28s %s [%ds]\n' "$label" "$db" "$verdict" \
        "${outcome:-no pytest summary}" $((SECONDS - start)) >>"$summary"
}

# run_django_suite LEG DB: Django's own tests/tasks against our backend
# (tools/django_tasks_suite.py), in a leg whose Django has django.tasks.
run_django_suite() {
    local leg=$1 db=$2 label=djtasks-$1
    local python=.venv/$leg/bin/python
    if ! "$python" -c 'import django, sys; sys.exit(django.VERSION < (6, 0))'; then
        # The django-tasks backport's sdist ships no tests to run instead.
        printf '%-18s %-9s %-28s %s\n' "$label" - "not applicable" \
            "Django < 6: no django.tasks test suite" >>"$summary"
        return
    fi
    local log=$logs/$label-$db.log
    printf '\n==> %s, %s: python -m tools.django_tasks_suite\n' "$label" "$db"
    local start=$SECONDS
    "$python" -m tools.django_tasks_suite --db "$db" 2>&1 | tee "$log"
    local status=${PIPESTATUS[0]}
    local outcome verdict=ok
    # unittest's closing lines, e.g. "Ran 45 tests in 0.4s" and "OK".
    outcome=$(grep -E '^Ran [0-9]+ tests? in ' "$log" | tail -n 1)
    if [[ $status -ne 0 ]]; then
        verdict="FAILED (exit $status)"
        failed=$((failed + 1))
    fi
    printf '%-18s %-9s %-28s %s [%ds]\n' "$label" "$db" "$verdict" \
        "${outcome:-no test summary}" $((SECONDS - start)) >>"$summary"
}

# databases_of LEG: the databases LEG runs the suite on, space-separated.
databases_of() {
    local entry
    for entry in $leg_dbs; do
        if [[ ${entry%%=*} == "$1" ]]; then
            echo "${entry#*=}" | tr ',' ' '
            return
        fi
    done
    echo "$dbs"
}

for leg in "${legs[@]}"; do
    leg_databases=$(databases_of "$leg")
    last_leg_db=${leg_databases##* }
    leg_has_sqlite=false
    [[ " $leg_databases " == *" sqlite "* ]] && leg_has_sqlite=true
    # The project tests this leg runs, on its last database (with
    # --whole-suite: all of them, in every leg).
    leg_projects=()
    if [[ $whole_suite == true ]]; then
        leg_projects=("${SHOP_PROJECT_TESTS[@]}" "${NEW_PROJECT_TESTS[@]}")
    else
        [[ $leg == "${legs[0]}" ]] && leg_projects+=("${SHOP_PROJECT_TESTS[@]}")
        [[ $leg == "${legs[-1]}" ]] && leg_projects+=("${NEW_PROJECT_TESTS[@]}")
    fi
    for db in $leg_databases; do
        projects=()
        [[ $db == "$last_leg_db" ]] && projects=("${leg_projects[@]}")
        if [[ $db == sqlite || $whole_suite == true ]]; then
            # The whole suite, but for the project tests another run takes.
            elsewhere=()
            for project in "${SHOP_PROJECT_TESTS[@]}" "${NEW_PROJECT_TESTS[@]}"; do
                [[ " ${projects[*]} " == *" $project "* ]] ||
                    elsewhere+=("--ignore=$project")
            done
            run_pytest "$leg" "$db" "$leg" --ignore=tests/faults --ignore=tests/upgrade \
                --ignore=tests/browser \
                "${PROCESS_TESTS[@]/#/--ignore=}" "${elsewhere[@]}" "${pytest_args[@]}"
            continue
        fi
        subset=("${VENDOR_TESTS[@]}")
        if [[ $leg_has_sqlite == false ]]; then
            subset+=("${DJANGO_TESTS[@]}")
        fi
        SUBSET_RUN=1 run_pytest "$leg" "$db" "$leg" "${subset[@]}" "${projects[@]}" \
            "${pytest_args[@]}"
    done
    # Once per leg, on its last database.
    run_django_suite "$leg" "$last_leg_db"
done

if [[ -n $faults_leg ]]; then
    fault_dbs=${fault_dbs:-$dbs}
    last_db=${fault_dbs##* }
    for db in $fault_dbs; do
        if [[ $db == "$last_db" ]]; then
            run_pytest "$faults_leg" "$db" "faults-$faults_leg" tests/faults \
                tests/upgrade "${PROCESS_TESTS[@]}" --durations=15 \
                "${pytest_args[@]}"
        elif [[ $db != sqlite ]]; then
            # Another server database: the scenarios its transactions and
            # locks decide, and the upgrade test.
            run_pytest "$faults_leg" "$db" "faults-$faults_leg" "${CORE_FAULTS[@]}" \
                tests/upgrade --durations=10 "${pytest_args[@]}"
        else
            # The fault scenarios run against the server databases; the
            # upgrade test against each.
            run_pytest "$faults_leg" "$db" "upgrade-$faults_leg" tests/upgrade \
                "${pytest_args[@]}"
        fi
    done
fi

if [[ ${#browser_legs[@]} -gt 0 ]]; then
    # The example shop keeps its data in its own SQLite file, whatever the
    # suite's database: one run per leg is enough.
    screenshots=${DELAYQ_SCREENSHOTS:-$logs/screenshots}
    for leg in "${browser_legs[@]}"; do
        DELAYQ_SCREENSHOTS=$screenshots/$leg run_pytest "$leg" sqlite \
            "browser-$leg" tests/browser "${pytest_args[@]}"
    done
    printf 'run_tests: browser screenshots in %s\n' "$screenshots"
fi

printf '\nTest matrix:\n'
cat "$summary"
if [[ $failed -gt 0 ]]; then
    printf 'run_tests: %d run(s) failed\n' "$failed" >&2
    exit 1
fi
