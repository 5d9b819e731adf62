// The configuration's TOML side (private to lowcomm_train): a TOML value as a schema::Value, a
// file parsed with errors naming file:line:column.
#pragma once

#include <string>
#include <toml++/toml.h>

#include "lowcomm/base/schema.h"

namespace lowcomm::train {

// The node's value; throws KeyError naming `key` for a table, a date or a mixed array.
schema::Value tomlValue(const std::string& key, const toml::node& n);
// Throws ConfigError "path:line:column: what".
toml::table parseTomlFile(const std::string& path);

}  // namespace lowcomm::train
