//! The options table of `docs/configuration.md`, rendered from the same clap definitions as
//! `loghaul serve --help`, so the documentation cannot drift from the flags.

use clap::{Args, Command};

use super::ServeConfig;

/// Where the generated table starts and ends in `docs/configuration.md`.
pub(crate) const TABLE_START: &str = "<!-- options table: generated from `loghaul serve`'s flags; `LOGHAUL_UPDATE_DOCS=1 cargo test options_table` rewrites it -->";
/// The line after the generated table.
pub(crate) const TABLE_END: &str = "<!-- end of the options table -->";

/// One row per option of `loghaul serve`: its flag, environment variable, default and help.
pub(crate) fn options_table() -> String {
    let command = ServeConfig::augment_args(Command::new("serve"));
    let mut table = String::from("| flag | environment | default | |\n|---|---|---|---|\n");
    for arg in command.get_arguments() {
        let Some(flag) = arg.get_long() else {
            continue;
        };
        let env = arg
            .get_env()
            .map(|env| format!("`{}`", env.to_string_lossy()))
            .unwrap_or_default();
        let default = arg
            .get_default_values()
            .iter()
            .map(|value| format!("`{}`", value.to_string_lossy()))
            .collect::<Vec<_>>()
            .join(", ");
        let help = arg
            .get_long_help()
            .or_else(|| arg.get_help())
            .map(|help| help.to_string())
            .unwrap_or_default();
        let help = help
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .replace('|', "\\|");
        table.push_str(&format!("| `--{flag}` | {env} | {default} | {help} |\n"));
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fails when `docs/configuration.md` does not hold today's table; with
    /// `LOGHAUL_UPDATE_DOCS=1` it writes the table there instead.
    #[test]
    fn the_options_table_in_the_docs_is_the_one_the_flags_make() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/configuration.md");
        let text = std::fs::read_to_string(&path).unwrap();
        let start = text
            .find(TABLE_START)
            .expect("the docs mark where the table starts");
        let end = text
            .find(TABLE_END)
            .expect("the docs mark where the table ends");
        let current = &text[start + TABLE_START.len()..end];
        let wanted = format!("\n{}", options_table());
        if current == wanted {
            return;
        }
        if std::env::var_os("LOGHAUL_UPDATE_DOCS").is_some() {
            let updated = format!(
                "{}{wanted}{}",
                &text[..start + TABLE_START.len()],
                &text[end..]
            );
            std::fs::write(&path, updated).unwrap();
            return;
        }
        panic!(
            "docs/configuration.md's options table is stale; run `LOGHAUL_UPDATE_DOCS=1 cargo test options_table` and commit the result"
        );
    }

    #[test]
    fn every_flag_has_a_row_with_its_environment_variable() {
        let table = options_table();
        let row = "| `--database-url` | `LOGHAUL_DATABASE_URL` | `sqlite://loghaul.db` |";
        assert!(table.contains(row), "{table}");
        assert!(
            table.contains("| `--query-timeout` | `LOGHAUL_QUERY_TIMEOUT` | `10s` |"),
            "{table}"
        );
    }
}
