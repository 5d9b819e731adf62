// `lowcomm config keys [--markdown]`: every configuration key with its type, range or choices,
// default and doc, from the declarations (docs/config.md is the Markdown form).
// `lowcomm config show [--config FILE] [--set key=value ...]`: the resolved configuration as TOML.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "cli_util.h"
#include "commands.h"
#include "lowcomm/train/config.h"

namespace lowcomm::cli {

int cmdConfig(int argc, char** argv) {
  CLI::App app{"Configuration keys and resolved configurations", "lowcomm config"};
  app.require_subcommand(1);
  bool markdown = false;
  auto* keys = app.add_subcommand("keys", "print every key: type and range or choices, default, doc");
  keys->add_flag("--markdown", markdown, "as the Markdown page docs/config.md");
  std::string config;
  std::vector<std::string> sets;
  auto* show = app.add_subcommand("show", "print the resolved configuration (defaults, file, overrides) as TOML");
  show->add_option("--config", config, "TOML configuration file");
  show->add_option("--set", sets, "override a key: section.key=value (repeatable)");
  if (!parseArgs(app, argc, argv)) return 0;
  if (show->parsed()) {
    std::cout << train::toToml(train::loadConfig(config, sets));
    return 0;
  }
  if (markdown) {
    std::cout << train::configKeysMarkdown();
    return 0;
  }
  for (const auto& k : train::configKeyInfo())
    std::printf("%-30s %-10s %s  [%s]\n", k.key.c_str(), train::tomlText(k.default_value).c_str(), k.doc.c_str(),
                schema::ruleText(k.rule).c_str());
  return 0;
}

}  // namespace lowcomm::cli
