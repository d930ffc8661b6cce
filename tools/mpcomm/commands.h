// Subcommands of the mpcomm CLI; each registers its options on a CLI11 subcommand and returns the
// function that runs it.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace mpcomm::cli {

using Runner = std::function<int()>;

Runner add_launch(CLI::App& app);
Runner add_selftest(CLI::App& app);
Runner add_info(CLI::App& app);
std::string info_text();
Runner add_bench(CLI::App& app);
Runner add_compare(CLI::App& app);
// compare --report: one traced training step per backend, drawn into dir; returns its Markdown section.
std::string timeline_section(const std::vector<std::string>& backends, const std::string& dir);
Runner add_bench_worker(CLI::App& app);
Runner add_train(CLI::App& app);
Runner add_train_worker(CLI::App& app);
Runner add_tune(CLI::App& app);
Runner add_tune_worker(CLI::App& app);
Runner add_trace_merge(CLI::App& app);
Runner add_plan(CLI::App& app);

}  // namespace mpcomm::cli
