//! `cargo run -p config --example check -- FILE...`: load configuration
//! files and print their diagnostics (a quick `proxy -t` without TLS).

fn main() {
    let mut failed = false;
    for arg in std::env::args().skip(1) {
        match config::load_path(std::path::Path::new(&arg)) {
            Ok(loaded) => {
                for w in &loaded.warnings {
                    eprintln!("{w}");
                }
                println!("{arg}: ok");
                if std::env::var_os("CONFIG_DUMP").is_some() {
                    println!("{:#?}", loaded.config);
                }
                if std::env::var_os("CONFIG_TOML").is_some() {
                    match toml::to_string_pretty(&loaded.config) {
                        Ok(t) => println!("{t}"),
                        Err(e) => eprintln!("cannot express as TOML: {e}"),
                    }
                }
            }
            Err(diags) => {
                eprintln!("{diags}");
                failed = true;
            }
        }
    }
    std::process::exit(i32::from(failed));
}
