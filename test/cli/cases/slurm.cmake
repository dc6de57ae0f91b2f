# Job arrays (issue 42): the templates of scripts/slurm run through run-local.sh (the variables
# Slurm sets) give one process's outputs; infolaw-fit's bootstrap parts and their merge.
# (A real one-node Slurm runs them in make -f Makefile.shortcuts slurm-check, not here.)
cli_case(slurm/templates-give-one-process-outputs --needs ${SHARED}/vectors/digits.csv.gz --rc 0 --tool lm-sweep
  -- bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm/templates.sh $<TARGET_FILE_DIR:lm-train> ${PROJECT_SOURCE_DIR}/scripts/slurm
     ${FX} ${SHARED}/vectors/digits.csv.gz)
set(BOOT ${FIT} ${DATA}/chinchilla_synthetic.csv ${SMALL_GRID_STR} --bootstrap 12 -q)
string(REPLACE ";" " " BOOT_STR "${BOOT}")
cli_case(infolaw-fit/bootstrap-part-missing --rc 1 --tool infolaw-fit --stderr "resample 8 of 12 is in none of the 2 parts" --no-file m.json
  -- bash -c "${BOOT_STR} --array-task 0/3 -o p0.json && ${BOOT_STR} --array-task 1/3 -o p1.json && ${BOOT_STR} --bootstrap-parts p0.json p1.json -o m.json")
cli_case(infolaw-fit/bootstrap-parts-of-another-fit --rc 1 --tool infolaw-fit --stderr "another fit .*p1.json" --no-file m.json
  -- bash -c "${BOOT_STR} --array-task 0/2 -o p0.json && ${BOOT_STR} --seed 4 --array-task 1/2 -o p1.json && ${BOOT_STR} --bootstrap-parts p0.json p1.json -o m.json")
cli_case(infolaw-fit/array-task-needs-bootstrap --rc 2 --stderr "--array-task needs --bootstrap K" --no-file p.json
  -- ${FIT} ${DATA}/chinchilla_synthetic.csv ${SMALL_GRID} --array-task 0/2 -o p.json)
