//! Which dataset column each of a file's columns goes into. People's files rarely spell the
//! dataset's columns exactly ("E-mail" for `email`, "Signed up" for `signed_up`), carry columns
//! the dataset does not want, or come from a system whose names were mapped before: a mapping
//! says, per file column, the dataset column it fills, or that it is ignored. A file column the
//! mapping does not name fills the dataset column of the same name, as without a mapping.
//!
//! Suggestions ([`suggest`]) match names once normalised (case, spaces, punctuation and accents
//! do not count) and prefer what earlier imports into the dataset were told.

use std::collections::{BTreeMap, HashSet};

use unicode_normalization::{UnicodeNormalization, char::is_combining_mark};

use super::{
    report,
    schema::{self, Column},
};

/// File column → the dataset column it fills (`None`: ignored).
pub type Mapping = BTreeMap<String, Option<String>>;

/// The most file columns a mapping may name.
pub const MAX_ENTRIES: usize = super::MAX_COLUMNS;

/// A name as matching sees it: letters and digits only, lower case, accents dropped
/// (`"E-mail "` and `"email"`, `"Créé le"` and `"cree_le"` are the same).
pub fn normalised(name: &str) -> String {
    name.nfkd()
        .filter(|c| !is_combining_mark(*c))
        .filter(|c| c.is_alphanumeric())
        .flat_map(char::to_lowercase)
        .collect()
}

/// The dataset column each header cell fills (`None`: ignored), in file order; the columns an
/// error report adds (`_row`, `_error`) are ignored unless mapped, so a fixed report imports
/// as it is. Refuses a mapping that fills one dataset column from two file columns.
pub fn targets(header: &[String], mapping: &Mapping) -> Result<Vec<Option<String>>, String> {
    let strangers: Vec<&str> = mapping
        .keys()
        .filter(|name| !header.contains(name))
        .map(String::as_str)
        .collect();
    if !strangers.is_empty() {
        return Err(format!(
            "The mapping names columns the file does not have: {}. The file's columns: {}.",
            schema::listed(strangers.into_iter()),
            schema::listed(header.iter().map(String::as_str)),
        ));
    }
    let targets: Vec<Option<String>> = header
        .iter()
        .map(|name| match mapping.get(name) {
            Some(target) => target.clone(),
            None if report::is_added(name) => None,
            None => Some(name.clone()),
        })
        .collect();
    let mut seen = HashSet::new();
    for (name, target) in header.iter().zip(&targets) {
        if let Some(target) = target
            && !seen.insert(target)
        {
            return Err(format!(
                "Two of the file's columns would fill the dataset column \"{target}\" (the \
                 second is \"{name}\"): map one of them elsewhere or ignore it."
            ));
        }
    }
    Ok(targets)
}

/// The columns a dataset without any takes from a file: the mapped header's, as text.
pub fn adopted(header: &[String], mapping: &Mapping) -> Result<Vec<Column>, String> {
    let columns: Vec<Column> = targets(header, mapping)?
        .iter()
        .flatten()
        .map(|name| Column::text(name))
        .collect();
    if columns.is_empty() {
        return Err(
            "The mapping ignores every column of the file: there is nothing to import.".into(),
        );
    }
    schema::check_schema(columns, None)
}

/// Each header cell's dataset column (an ignored cell: a text column of its own name) and its
/// place among the dataset's `declared` columns (`None`: ignored). Fails, naming the columns
/// at fault, when a required column is left empty or a cell fills a column the dataset does
/// not have ([`schema::align`]).
pub fn lay_out(
    header: &[String],
    mapping: &Mapping,
    declared: &[Column],
) -> Result<Vec<(Column, Option<usize>)>, String> {
    let targets = targets(header, mapping)?;
    let filled: Vec<String> = targets.iter().flatten().cloned().collect();
    let mut aligned = schema::align(&filled, declared)?.into_iter();
    Ok(header
        .iter()
        .zip(&targets)
        .map(|(name, target)| match target {
            Some(target) => (
                aligned.next().expect("one aligned column per filled cell"),
                declared.iter().position(|d| &d.name == target),
            ),
            None => (Column::text(name), None),
        })
        .collect())
}

/// Checks a mapping before a job is queued: at most [`MAX_ENTRIES`] entries of names a column
/// may have, and when the dataset has columns, every target is one of them.
pub fn check(mapping: &Mapping, columns: &[Column]) -> Result<(), String> {
    if mapping.len() > MAX_ENTRIES {
        return Err(format!("A mapping names at most {MAX_ENTRIES} columns."));
    }
    let names = mapping.keys().chain(mapping.values().flatten());
    if names
        .clone()
        .any(|name| name.contains('\0') || name.chars().count() > 1000)
    {
        return Err("A mapping's column names are at most 1,000 characters, without NUL.".into());
    }
    if mapping
        .values()
        .flatten()
        .any(|t| t.is_empty() || t.trim() != t)
    {
        return Err(
            "A mapping fills columns with names: not empty, no spaces around them (or null to \
             ignore a column)."
                .into(),
        );
    }
    if columns.is_empty() {
        return Ok(());
    }
    for target in mapping.values().flatten() {
        if !columns.iter().any(|c| &c.name == target) {
            return Err(format!(
                "The mapping fills \"{target}\", which is not one of the dataset's columns."
            ));
        }
    }
    Ok(())
}

/// The dataset column suggested for each header cell (`None`: none fits), no column twice.
/// First what the most recent earlier mapping (`used`, newest first) did with the same file
/// column, then the column of the same name, then one whose [`normalised`] name is the same.
pub fn suggest(header: &[String], columns: &[Column], used: &[Mapping]) -> Vec<Option<String>> {
    let mut taken: HashSet<&str> = HashSet::new();
    let mut suggested: Vec<Option<String>> = vec![None; header.len()];
    let is_column = |name: &str| columns.iter().any(|c| c.name == name);
    // Earlier mappings and exact names first, so a loose match never takes their column.
    for (i, name) in header.iter().enumerate() {
        if report::is_added(name) {
            continue;
        }
        let remembered = used.iter().find_map(|mapping| mapping.get(name));
        let pick = match remembered {
            Some(Some(target)) if is_column(target) => Some(target.as_str()),
            Some(None) => continue,
            _ => is_column(name).then_some(name.as_str()),
        };
        if let Some(target) = pick
            && taken.insert(target)
        {
            suggested[i] = Some(target.to_owned());
        }
    }
    for (i, name) in header.iter().enumerate() {
        let ignored = used.iter().any(|m| m.get(name) == Some(&None));
        if suggested[i].is_some() || ignored || report::is_added(name) {
            continue;
        }
        let key = normalised(name);
        let found = columns
            .iter()
            .find(|c| !taken.contains(c.name.as_str()) && normalised(&c.name) == key);
        if let Some(column) = found {
            taken.insert(&column.name);
            suggested[i] = Some(column.name.clone());
        }
    }
    suggested
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn columns(list: &[&str]) -> Vec<Column> {
        list.iter().map(|name| Column::text(name)).collect()
    }

    #[test]
    fn names_match_whatever_their_case_spaces_punctuation_and_accents() {
        assert_eq!(normalised("E-mail "), "email");
        assert_eq!(normalised("Signed up"), normalised("signed_up"));
        assert_eq!(normalised("Créé le"), "creele");
        assert_eq!(normalised("Straße"), "straße");
    }

    #[test]
    fn suggestions_prefer_earlier_mappings_then_exact_then_loose_names() {
        let header = names(&["E-mail", "email", "Signed up", "Notes", "Phone"]);
        let dataset = columns(&["email", "signed_up", "phone_no"]);
        // Without history: "email" takes `email` exactly; "E-mail" finds nothing left.
        assert_eq!(
            suggest(&header, &dataset, &[]),
            vec![
                None,
                Some("email".into()),
                Some("signed_up".into()),
                None,
                None
            ]
        );
        // An earlier import mapped "Phone" to `phone_no` and ignored "email".
        let earlier = Mapping::from([
            ("Phone".to_string(), Some("phone_no".to_string())),
            ("email".to_string(), None),
        ]);
        assert_eq!(
            suggest(&header, &dataset, &[earlier]),
            vec![
                Some("email".into()),
                None,
                Some("signed_up".into()),
                None,
                Some("phone_no".into())
            ]
        );
    }

    #[test]
    fn targets_follow_the_mapping_and_refuse_a_column_filled_twice() {
        let header = names(&["E-mail", "Notes", "id"]);
        let mapping = Mapping::from([
            ("E-mail".to_string(), Some("email".to_string())),
            ("Notes".to_string(), None),
        ]);
        assert_eq!(
            targets(&header, &mapping).unwrap(),
            vec![Some("email".into()), None, Some("id".into())]
        );
        let twice = Mapping::from([("E-mail".to_string(), Some("id".to_string()))]);
        assert!(targets(&header, &twice).unwrap_err().contains("\"id\""));
        // A column the file does not have is a mistake, not nothing.
        let stranger = Mapping::from([("notes".to_string(), None)]);
        assert!(targets(&header, &stranger).unwrap_err().contains("notes"));
        // A new dataset's columns are checked as any dataset's.
        let blank = Mapping::from([("Notes".to_string(), Some(" ".to_string()))]);
        assert!(adopted(&header, &blank).is_err());
        assert!(check(&twice, &columns(&["email"])).is_err());
        assert!(check(&twice, &[]).is_ok());
    }
}
