# Data-parallel lm-train over MPI (issue 41): ranks started by mpirun (OpenMPI; --oversubscribe, so 3
# ranks run on 2 cores), each of one thread.  Truth: one process running the same command, whose
# checkpoint's state SHA-256 (weights and optimizer state) every rank count must reproduce.  The
# cases skip (77) without mpirun or when lm-train was built without MPI.
set(MPI_SH ${CMAKE_CURRENT_SOURCE_DIR}/mpi)
set(LMT $<TARGET_FILE:lm-train>)
cli_case(lm-train/mpi-1-2-3-ranks-bit-identical --rc 0 --tool lm-train -- bash ${MPI_SH}/identical.sh ${LMT})
cli_case(lm-train/mpi-every-method-bit-identical --rc 0 --tool lm-train -- bash ${MPI_SH}/methods.sh ${LMT})
cli_case(lm-train/mpi-resume-on-other-rank-counts --rc 0 --tool lm-train -- bash ${MPI_SH}/resume.sh ${LMT})
cli_case(lm-train/mpi-dead-rank-ends-the-job --rc 0 --tool lm-train -- bash ${MPI_SH}/dead_rank.sh ${LMT})
cli_case(lm-train/mpi-ranks-that-disagree-are-refused --rc 0 --tool lm-train -- bash ${MPI_SH}/mismatch.sh ${LMT})
